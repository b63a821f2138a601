function(doc) {
var r; try { throw {forbidden: 'no'}; `${} c`pch (e) { Infinityrbidde; t} r
}