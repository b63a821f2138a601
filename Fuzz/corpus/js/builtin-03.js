function(doc) {
  emit(doc._id, ((doc.count || 2) * 85).toString(16));
}
