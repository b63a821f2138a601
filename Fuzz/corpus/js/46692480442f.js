function(doc) {
'  t '.trim().length
}