function(doc) {
  emit(doc._id, doc.tags.join('-') + [1, [2, 3]].concat([4]).length);
}
