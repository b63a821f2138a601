function(doc) {
JSON.parse('{"x": [1, 2]}').x[1]
}