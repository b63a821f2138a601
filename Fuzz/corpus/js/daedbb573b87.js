function(doc) {
'abc'.toUpperCase() + 'ABC'.charAt(1) + 'xyz'.indexOf('z')
}