function(doc) {
'a' + 1 + 2
}