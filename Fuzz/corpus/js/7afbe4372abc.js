function(doc) {
Math.max(1, 5, 3) + Math.floor(2.7) + Math.abs(-1)
}