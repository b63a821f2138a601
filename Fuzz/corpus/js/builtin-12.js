function(doc) {
  emit(doc._id, doc.title.substring(1, (doc.count || 2)) + doc.title.substr(-3, 2) + doc.title.slice(-2));
}
