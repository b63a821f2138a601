function(doc) {
const {a, b: [x, y]} = {a: 1, b: [2, 3]}; a + x + y
}