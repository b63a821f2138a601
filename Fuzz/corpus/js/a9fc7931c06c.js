function(doc) {
var r; try { throw {forbidden: 'no'}; } catch (e) { r = e.forbidden; } r
}