function(doc) {
var e = new TypeError('bad'); e.name + ': ' + e.message + ' ' + (e instanceof Error)
}