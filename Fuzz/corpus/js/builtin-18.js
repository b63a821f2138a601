function(doc) {
  emit(doc._id, 'x,y'.replace(/(\w)/g, '$1$1') + 'abc'.match(/b(c)/)[1]);
}
