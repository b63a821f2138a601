function(doc) {
Array.isArray([]) && !Array.isArray({})
}