function(doc) {
`x=${1 + 1}!`
}