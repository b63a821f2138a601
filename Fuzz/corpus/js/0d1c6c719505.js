function(doc) {
var o = {n: 1, inc() { this.n++; return this; }}; o.inc().inc().n
}