function(doc) {
  emit(doc._id, parseInt('ff', 16) + parseFloat('1.5e3') + Math.round(2.5) + Math.max.apply(null, [1, (doc.count || 2)]));
}
