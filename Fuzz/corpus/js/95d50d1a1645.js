function(doc) {
const add = (a, b = 2) => a + b; add(1)
}