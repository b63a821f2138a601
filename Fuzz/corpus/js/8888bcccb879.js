function(doc) {
0.1 + 0.2
}