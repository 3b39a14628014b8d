#include "fs/fs_protocol.h"

namespace clio {

void EncodeAttr(Encoder* e, const InodeAttr& a) {
  e->Put(a.ino).Put(a.mode).Put(a.nlink).Put(a.uid).Put(a.gid).Put(a.size);
  e->Put(a.atime_ns).Put(a.mtime_ns).Put(a.ctime_ns).Put(a.parent).Put(a.rdev).Put(a.stored);
}

bool DecodeAttr(Decoder* d, InodeAttr* a) {
  return d->Get(&a->ino) && d->Get(&a->mode) && d->Get(&a->nlink) && d->Get(&a->uid) &&
         d->Get(&a->gid) && d->Get(&a->size) && d->Get(&a->atime_ns) && d->Get(&a->mtime_ns) &&
         d->Get(&a->ctime_ns) && d->Get(&a->parent) && d->Get(&a->rdev) && d->Get(&a->stored);
}

void EncodeSetAttr(Encoder* e, const SetAttrRequest& r) {
  e->Put(r.valid).Put(r.mode).Put(r.uid).Put(r.gid).Put(r.size).Put(r.atime_ns).Put(r.mtime_ns);
}

bool DecodeSetAttr(Decoder* d, SetAttrRequest* r) {
  return d->Get(&r->valid) && d->Get(&r->mode) && d->Get(&r->uid) && d->Get(&r->gid) &&
         d->Get(&r->size) && d->Get(&r->atime_ns) && d->Get(&r->mtime_ns);
}

void EncodeStatfs(Encoder* e, const FsStatfs& s) {
  e->Put(s.block_size).Put(s.blocks).Put(s.blocks_free).Put(s.files).Put(s.files_free).Put(s.name_max);
}

bool DecodeStatfs(Decoder* d, FsStatfs* s) {
  return d->Get(&s->block_size) && d->Get(&s->blocks) && d->Get(&s->blocks_free) &&
         d->Get(&s->files) && d->Get(&s->files_free) && d->Get(&s->name_max);
}

}  // namespace clio
