function(doc) {
var s = 'x'; while (true) { s = s + s; }
}