function(doc) {
  emit(doc._id, [3, 1, 2].sort(function (a, b) { return b - a; }).splice(1, (doc.count || 2)));
}
