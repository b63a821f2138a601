function(doc) {
var log = ''; try { log += 'a'; } finally { log += 'b'; } log
}