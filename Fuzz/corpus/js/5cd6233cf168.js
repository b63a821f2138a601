function(doc) {
0.000001
}