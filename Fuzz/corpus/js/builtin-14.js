function(doc) {
  emit(doc._id, 'a-b-c'.split('-', (doc.count || 2)).indexOf('b'));
}
