function(doc) {
1e21
}