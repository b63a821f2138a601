function(doc) {
var counter = (function () { var c = 0; return function () { return ++c; }; })(); counter(); counter()
}