#include "fs/protocol/fs_protocol.h"

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
  if (r.valid & kSetCtime) e->Put(r.ctime_ns);
}

bool DecodeSetAttr(Decoder* d, SetAttrRequest* r) {
  return d->Get(&r->valid) && d->Get(&r->mode) && d->Get(&r->uid) && d->Get(&r->gid) &&
         d->Get(&r->size) && d->Get(&r->atime_ns) && d->Get(&r->mtime_ns) &&
         (!(r->valid & kSetCtime) || d->Get(&r->ctime_ns));
}

void EncodeStatfs(Encoder* e, const FsStatfs& s) {
  e->Put(s.block_size).Put(s.blocks).Put(s.blocks_free).Put(s.files).Put(s.files_free).Put(s.name_max);
}

bool DecodeStatfs(Decoder* d, FsStatfs* s) {
  return d->Get(&s->block_size) && d->Get(&s->blocks) && d->Get(&s->blocks_free) &&
         d->Get(&s->files) && d->Get(&s->files_free) && d->Get(&s->name_max);
}

std::string EncodeFileLocation(const FileLocation& f) {
  Encoder e;
  e.Put(f.ino).Put(f.size).Put(f.chunk_size).Put(static_cast<uint32_t>(f.chunks.size()));
  for (const ChunkLocation& c : f.chunks) {
    e.Put(c.index).Put(static_cast<uint32_t>(c.copies.size()));
    for (const ChunkCopy& k : c.copies) {
      e.Put(k.tier_id).Put<uint8_t>(k.dirty ? 1 : 0).Put(k.bytes).Put(static_cast<uint32_t>(k.extents.size()));
      for (const auto& [offset, size] : k.extents) e.Put(offset).Put(size);
    }
  }
  return e.Take();
}

Result<FileLocation> DecodeFileLocation(std::string_view bytes) {
  Decoder d(bytes);
  FileLocation f;
  uint32_t chunks = 0;
  d.Get(&f.ino);
  d.Get(&f.size);
  d.Get(&f.chunk_size);
  d.Get(&chunks);
  // Every count is bounded by the bytes left, so a broken reply cannot make us allocate much.
  if (chunks > bytes.size()) return Corruption("file location: impossible chunk count");
  for (uint32_t i = 0; i < chunks && !d.failed(); ++i) {
    ChunkLocation c;
    uint32_t copies = 0;
    d.Get(&c.index);
    d.Get(&copies);
    if (copies > bytes.size()) return Corruption("file location: impossible copy count");
    for (uint32_t j = 0; j < copies && !d.failed(); ++j) {
      ChunkCopy k;
      uint8_t dirty = 0;
      uint32_t extents = 0;
      d.Get(&k.tier_id);
      d.Get(&dirty);
      d.Get(&k.bytes);
      d.Get(&extents);
      if (dirty > 1 || extents > bytes.size()) return Corruption("file location: bad copy");
      k.dirty = dirty == 1;
      for (uint32_t x = 0; x < extents && !d.failed(); ++x) {
        uint64_t offset = 0, size = 0;
        d.Get(&offset);
        d.Get(&size);
        k.extents.emplace_back(offset, size);
      }
      c.copies.push_back(std::move(k));
    }
    f.chunks.push_back(std::move(c));
  }
  CLIO_RETURN_IF_ERROR(d.Finish("file location"));
  return f;
}

}  // namespace clio
