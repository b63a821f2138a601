function(doc) {
1 + 1
}