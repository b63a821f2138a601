function(doc) {
  emit(doc._id, encodeURIComponent(doc.title + ' é/?') + decodeURIComponent('%41'));
}
