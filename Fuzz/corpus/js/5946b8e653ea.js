function(doc) {
1 + 2 * 3
}