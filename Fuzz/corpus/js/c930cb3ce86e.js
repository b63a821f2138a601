function(doc) {
Object.keys({b: 1, a: 2, 1: 3}).join()
}