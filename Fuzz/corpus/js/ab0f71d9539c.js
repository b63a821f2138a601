function(doc) {
(255).toString(16) + (1.005).toFixed(1)
}