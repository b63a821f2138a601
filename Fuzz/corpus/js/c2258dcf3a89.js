function(doc) {
var i = 0; do { i++; } while (i < 5); i
}