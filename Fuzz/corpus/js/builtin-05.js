function(doc) {
  emit(doc._id, String.fromCharCode(72, 105, (doc.count || 2) + 30));
}
