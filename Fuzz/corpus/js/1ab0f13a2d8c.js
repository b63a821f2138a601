function(doc) {
7 % 3 + 2 ** 3
}