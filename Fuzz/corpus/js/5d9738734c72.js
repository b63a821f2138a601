function(doc) {
var s = 0; for (const v of [1, 2, 3]) s += v; s
}