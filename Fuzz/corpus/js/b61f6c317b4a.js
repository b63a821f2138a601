function(doc) {
'a,b,,c'.split(',').length
}