function(doc) {
/a+b/i.test('xAAB')
}