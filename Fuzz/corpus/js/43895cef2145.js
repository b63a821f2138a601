function(doc) {
-5 >>> 28
}