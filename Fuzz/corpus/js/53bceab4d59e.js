function(doc) {
1 + 2 + 'a'
}