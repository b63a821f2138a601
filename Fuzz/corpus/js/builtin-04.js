function(doc) {
  emit(doc._id, doc.title.charAt((doc.count || 2)) + doc.title.charCodeAt(1));
}
