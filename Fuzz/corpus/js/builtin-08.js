function(doc) {
  emit(doc._id, doc.title.padStart((doc.count || 2) * 4, '*') + doc.title.padEnd(8, '-'));
}
