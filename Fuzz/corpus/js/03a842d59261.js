function(doc) {
new Date(Date.UTC ? 0 : 0).toISOString()
}