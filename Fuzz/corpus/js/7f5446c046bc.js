function(doc) {
var keys = []; for (var k in {a: 1, b: 2}) keys.push(k); keys.join('')
}