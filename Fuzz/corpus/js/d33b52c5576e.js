function(doc) {
while (true) {}
}