function(doc) {
'x'.repeat(1e12)
}