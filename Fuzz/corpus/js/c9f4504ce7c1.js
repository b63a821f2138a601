function(doc) {
[10, 9, 1].sort(function (a, b) { return a - b; }).join()
}