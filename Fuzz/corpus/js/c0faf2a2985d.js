function(doc) {
hoisted(); function hoisted() { return 1; }
}