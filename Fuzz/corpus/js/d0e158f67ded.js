function(doc) {
'hello world'.replace(/o/g, '0')
}