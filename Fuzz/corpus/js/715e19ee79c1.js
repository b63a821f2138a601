function(doc) {
[3, 1, 2].sort().join()
}