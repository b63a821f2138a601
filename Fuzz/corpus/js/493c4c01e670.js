function(doc) {
undefinedThing.x
}