function(doc) {
null.x
}