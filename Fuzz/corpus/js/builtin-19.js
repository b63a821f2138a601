function(doc) {
  emit(doc._id, Object.keys(doc).filter(function (k) { return k[0] !== '_'; }).reduce(function (s, k) { return s + k.length; }, 0));
}
