function(doc) {
var r; switch (3) { case 1: r = 'a'; break; case 3: r = 'c'; case 4: r += 'd'; break; default: r = 'z'; } r
}