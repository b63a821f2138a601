function(doc) {
JSON.stringify({a: [1, 'x', null, true], b: undefined, c: 1.5})
}