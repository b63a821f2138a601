function(doc) {
  emit(doc._id, (doc.ratio * 3).toFixed(2));
}
