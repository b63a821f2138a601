function(doc) {
[1, [2, 3]].concat([4]).length + 'abc'.slice(-2)
}