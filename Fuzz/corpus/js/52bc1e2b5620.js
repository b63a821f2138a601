function(doc) {
var = 1
}