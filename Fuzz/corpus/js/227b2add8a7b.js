function(doc) {
new Array(1e12)
}