function(doc) {
1e-7
}