function(doc) {
1 / 3
}